"""Python helpers of meta-edge-llm, imported by bitbake via ``addpylib`` (see conf/layer.conf)."""

BBIMPORTS = ["modelcheck", "loginpolicy"]
