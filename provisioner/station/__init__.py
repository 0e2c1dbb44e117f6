"""Factory station: EDL boards, bundle preflight, parallel qdl flashing, serial consoles, records.

labgrid-style split:
- resources (what exists): ``edl.EdlDevice`` from sysfs, console ports and slots from ``config``;
- drivers (how to use it): ``qdl.QdlDriver``, ``console.ConsoleDriver`` (pyserial);
- strategy (per-board state machine): ``strategy.BoardStrategy`` emitting ``StepEvent``s;
- runs: ``flash.scan``, ``flash.flash_release``; checks: ``bundle.preflight``; ``flashxml`` parses
  rawprogram/patch XML with qdl's rules; ``records.Records`` keeps the SQLite history and
  exports the Ansible inventory.

Production code here is configured with paths (sysfs root, qdl, tty) and never imports the
simulator.
"""
