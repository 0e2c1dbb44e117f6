"""The pins the provisioner and the Yocto layer must agree on, written down once.

``provisioner litert build`` builds the LiteRT-LM runtime at :data:`LITERT_LM_COMMIT` against exactly
:data:`LITERT_LM_QAIRT` and names the tarball :func:`litert_tarball`; the plan checks the manifest
pins that QAIRT build; render writes :func:`layer_variables` into the ``edge-llm`` local.conf entry,
so the layer's ``litert-lm-runtime.bb`` reads them instead of restating them (its ``??=`` defaults,
for a layer used without render, are held equal to these by tests/image/test_layer.py). The
recipe names are the ones the layer's files carry (``recipes-ai/qairt/qairt-runtime-<v>.bb``,
``recipes-ai/litert-lm/litert-lm-runtime.bb``, render's generated ``edge-llm-model-<name>.bb``).
"""

from __future__ import annotations

LITERT_LM_UPSTREAM = "https://github.com/google-ai-edge/LiteRT-LM.git"
LITERT_LM_COMMIT = "cbf463d97fa3c7e8ef927b0593bf890d6d344c9a"
LITERT_LM_REV = LITERT_LM_COMMIT[:12]          # the on-board folder /opt/litert-lm/<rev> and the tarball name
LITERT_LM_QAIRT = "2.44.0.260225"               # LiteRT's third_party/qairt pin the runtime is compiled against
LITERT_LM_RECIPE = "litert-lm-runtime"


def litert_tarball(rev: str = LITERT_LM_COMMIT, qairt: str = LITERT_LM_QAIRT) -> str:
    """File name of the prebuilt runtime `provisioner litert build` writes and the layer fetches."""
    return f"{LITERT_LM_RECIPE}-{rev[:12]}-qairt{qairt}-aarch64.tar.gz"


def qairt_recipe(version: str) -> str:
    """The layer's recipe (and package) for one QAIRT build."""
    return f"qairt-runtime-{version}"


def model_recipe(name: str) -> str:
    """The recipe render generates for one manifest model."""
    return f"edge-llm-model-{name}"


def layer_variables() -> dict[str, str]:
    """The LiteRT-LM pins as the layer's variables (render puts them in the ``edge-llm`` entry)."""
    return {"LITERT_LM_REV": LITERT_LM_REV, "LITERT_LM_QAIRT": LITERT_LM_QAIRT, "LITERT_LM_TARBALL": litert_tarball()}
