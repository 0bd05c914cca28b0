"""Engine-neutral I/O at the bottom of the layers: files by URI (``storage``) and serialization (``serde``)."""
