"""The doctor: facts about the GPU software stack, what does not fit together, and the fix."""
