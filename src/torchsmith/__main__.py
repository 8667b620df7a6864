from torchsmith.cli import main

main()
