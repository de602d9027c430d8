from drill.cli import main

main()
