"""Edge-LLM provisioner: put LLMs on Qualcomm Dragonwing boards with QLI 2.0, reproducibly.

Data flows one way: manifest -> plan -> artifacts -> image -> station -> fleet.
"""

__version__ = "0.1.0"
