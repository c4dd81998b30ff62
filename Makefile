# The README's two commands: `make lab` and `make test`. Each sets itself up first.
.PHONY: setup lab test bench lint clean

setup:
	@bash scripts/setup.sh

# The main job on the embedded lab site: validate, plan, render and deploy it.
lab: setup
	@bash scripts/lab.sh

test: setup
	@bash scripts/test.sh

bench: setup
	@.venv/bin/python benchmarks/plan_bench.py

clean:
	rm -rf .aisite build .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Re-render manifests/<site>/ for every stack (reviewed and applied by GitOps; a test keeps them current).
manifests: setup
	@.venv/bin/python -m aisite.render.commit
