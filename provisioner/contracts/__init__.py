"""Typed contracts between the stages: what one stage hands to the next.

The stages (manifest/catalog -> plan -> artifacts -> image -> station -> fleet) import these
modules and never each other, so a file's format is defined in exactly one place:

- :mod:`provisioner.contracts.release_document`: ``release.json`` as a frozen, typed document with its
  published JSON schema (``release.schema.json``), its one reader and its one writer (the image stage
  writes it; station, OTA and fleet read models, pins, thresholds and the OSTree commit from it);
- :mod:`provisioner.contracts.release`: the release folder around it and the flash bundle it names
  (opening a folder, bundle or tarball; checking the bundle's files);
- :mod:`provisioner.contracts.inventory`: the ``edge_llm_*`` Ansible inventory variables, the
  group name of a board type, the decode/TTFT threshold rule and the only inventory writer;
- :mod:`provisioner.contracts.download_mode`: the kernel's spellings of the qcom_scm download_mode
  the fleet reads back from a board, as mode numbers;
- :mod:`provisioner.contracts.pins`: the LiteRT-LM revision, QAIRT pin, tarball and recipe names
  the provisioner and the Yocto layer must agree on;
- :mod:`provisioner.contracts.board`: where things live on a board (the paths the layer installs to
  and the fleet, station and service use), handed to the layer as its ``EDGE_LLM_*`` path variables.
"""
