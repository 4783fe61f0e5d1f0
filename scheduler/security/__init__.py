"""Who sent a request (munge) and what they may charge and read."""
