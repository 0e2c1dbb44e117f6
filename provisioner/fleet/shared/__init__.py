"""What the fleet's operations share: data they read and write, and the on-board service they deploy.

``inventory`` (group_vars, inventories from station records, host listing), ``deploy_index`` (what the
artifact server holds), ``version_switch`` (moving a board's model version, for deploy and rollback),
``report`` (one row per board), ``eval_report`` (eval scores per board and model), ``diagnosis``
(failure causes), ``hostkey`` (a changed SSH host key), ``onboard`` (the edge_llm_serve package from the
layer) and ``serve_config`` (its per-model config and the smoke run built from it).
"""
