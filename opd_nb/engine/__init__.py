"""The local OPD engine: trains small Hugging Face models the way Bailian runs an OPD job.

Kept light at import: torch and transformers are imported by the submodules that train.
"""
