from norma_cli.cli import main

main()
