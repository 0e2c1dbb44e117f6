"""Factory station: EDL boards, bundle preflight, parallel qdl flashing, serial consoles, records.

labgrid-style split:
- resources (what exists): ``edl.EdlDevice`` from sysfs, console ports and slots from ``config``;
- drivers (how to use it): ``qdl.QdlDriver``, ``console.ConsoleDriver`` (pyserial);
- strategy (per-board state machine): ``strategy.BoardStrategy`` emitting ``StepEvent``s;
- runs: ``flash.scan``, ``flash.flash_release``; checks: ``bundle.preflight``; ``flashxml`` parses
  rawprogram/patch XML with qdl's rules; ``records.Records`` keeps the SQLite history;
- identity from the line: ``identity`` validates serials and SSH host keys read on the console;
  ``inventory_export`` writes the Ansible inventory with the ``known_hosts`` that pins them;
  ``lava`` writes LAVA jobs (deploy to: qdl) for labs that flash with LAVA.

Production code here is configured with paths (sysfs root, qdl, tty) and never imports the
simulator.
"""
