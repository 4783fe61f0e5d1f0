"""labq's scheduler: the pure policy and ledger, and the single-writer daemon around them."""
