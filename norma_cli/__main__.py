from norma_cli.oneshot import main

main()
