from keyspan.cli.main import main

main()
