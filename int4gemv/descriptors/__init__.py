"""One descriptor module per kernel (see :mod:`int4gemv.descriptor`); :mod:`int4gemv.registry`
collects them."""
