"""Exact resume: the training epoch's running state saved in every checkpoint under
``checkpoint["lightning_step_types"]``, and put back when a fit resumes from it."""
