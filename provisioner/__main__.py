from provisioner.cli import run

run()
