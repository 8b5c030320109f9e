from pipeline.sim.server import main

main()
