from interleave_thinker.cli.main import main

main()
