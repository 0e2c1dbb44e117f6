"""Judging a board's model on the board: eval suites (golden questions, tool use) and how answers are scored.

``suite`` reads and validates a suite file (YAML) into typed cases and the OpenAI chat requests they send;
``score`` judges the answers a board's service gave. Both are pure: ``provisioner fleet eval`` and the
deploy / update-os gates move the requests to the boards and the answers back (provisioner.fleet.eval).
"""
