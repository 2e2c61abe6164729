"""New cells embedded with a fitted model left as it is (query mapping): q(x*) of cells a block
at a time and the query they make (:mod:`.cell_mapper`), and the offsets on f of batches the
model was not fitted with (:mod:`.offsets`).

This room imports only the room below it (``cells``); its ``__init__`` imports none of its
modules."""
