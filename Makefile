# The README's two commands: `make lab` and `make test`. Each sets itself up first.
.PHONY: setup lab test reference bench bench-lab bench-lab-cold bench-fabric bench-deploy bench-reconcile bench-scale bench-provision bench-storage manifests clean

setup:
	@bash scripts/setup.sh

# The main job on the embedded lab site: validate, plan, render and deploy it.
lab: setup
	@bash scripts/lab.sh

test: setup
	@bash scripts/test.sh

# validate, plan --json and render of generated 1,024- to 32,768-GPU sites (whole processes), then the in-process
# plan, render and layer-state timings of DGX H100 sites of 64 to 4,096 GPUs.
bench: setup
	@.venv/bin/python benchmarks/site_scale_bench.py
	@.venv/bin/python benchmarks/plan_bench.py

# Re-generate docs/reference/ (every stack key, and the stack file's JSON Schema) from aisite/model/.
reference: setup
	@.venv/bin/python -m aisite.reference --write

clean:
	rm -rf .aisite build .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Re-render manifests/<site>/ for every stack (reviewed and applied by GitOps; a test keeps them current).
manifests: setup
	@.venv/bin/python -m aisite.render.commit

# Lab timings: warm up, a second up, down. `make bench-lab-cold` rebuilds the images first.
bench-lab: setup
	@.venv/bin/python benchmarks/lab_bench.py

bench-lab-cold: setup
	@.venv/bin/python benchmarks/lab_bench.py --cold

# iperf3 between two lab nodes, same rail and across rails through the spines (JSON).
bench-fabric: setup
	@.venv/bin/python benchmarks/fabric_bench.py

# Deploy timings on a lab of its own: cold, 5 no-change passes, a one-host change with --limit (table + JSON).
bench-deploy: setup
	@.venv/bin/python benchmarks/deploy_bench.py

# The running lab's storage (after `make lab`): S3 put/get from the controller, CephFS and NFS sequential reads for
# 1, 2 and all GPU nodes, and how many emulated ResNet-50 accelerators one node keeps 90 % busy (table + JSON).
bench-storage: setup
	@.venv/bin/python benchmarks/storage_bench.py

# Provisioning timings on a lab of its own: power on to SSH of the lab's VM, per step (TCG; `--kvm` to try KVM).
bench-provision: setup
	@.venv/bin/python benchmarks/provision_bench.py

# Reconcile timings on a lab of its own: a pass with nothing to change, commit-to-converged of a one-host change.
bench-reconcile: setup
	@.venv/bin/python benchmarks/reconcile_bench.py

# The host layers' pass, pushed and pulled, on labs of 4, 8, 16 and 32 GPU nodes (about an hour on 2 cores).
bench-scale: setup
	@.venv/bin/python benchmarks/scale_bench.py
