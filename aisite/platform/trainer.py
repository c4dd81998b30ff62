"""The ClusterTrainingRuntime the site's TrainJobs run on, the project's own: the Kubeflow trainer chart's built-in
runtimes come through a hook Job that pulls alpine and installs kubectl from the internet, which an air-gapped site
cannot run. The same shape as the chart's torch-distributed (trainer 2.3.0's files/runtimes), on the site's PyTorch
image; each TrainJob patches in its tenant's mounts, placement and Pod Security context (platform/jobs.py)."""

from __future__ import annotations

from typing import Any

from aisite.plan import Plan
from aisite.platform.common import labels, obj

TRAINER_RUNTIME = "torch-distributed"
# The step label the trainer's torch plugin looks for on the replicated job that runs torchrun.
ANCESTOR_STEP = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def training_runtime(plan: Plan, pytorch_image: str) -> dict[str, Any]:
    node = {"name": "node", "image": pytorch_image}
    return obj(
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
        TRAINER_RUNTIME,
        labels(plan) | {"trainer.kubeflow.org/framework": "torch"},
        spec={
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": ANCESTOR_STEP},
                                "spec": {"template": {"spec": {"containers": [node]}}},
                            },
                        }
                    ]
                }
            },
        },
    )
