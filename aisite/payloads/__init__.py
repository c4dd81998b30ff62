"""Benchmark payloads: the project's own code that runs inside the job containers (NGC images on a site, the lab's
nodes) and prints one result line each (result.py). Plain scripts too: a job mounts this folder and runs
`python3 resnet.py` or `python3 tools.py KIND -- COMMAND`; only resnet.py needs more than the standard library
(PyTorch)."""
