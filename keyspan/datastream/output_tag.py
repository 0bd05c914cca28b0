"""``OutputTag`` as in ``pyflink.datastream.output_tag``: names a side output of an operator."""

from __future__ import annotations


class OutputTag:
    """A process function emits ``yield tag, value`` to send ``value`` to the side output ``tag``;
    ``stream.get_side_output(tag)`` reads it. Tags are equal when their ids are."""

    def __init__(self, tag_id: str, type_info=None):
        if not tag_id:
            raise ValueError("OutputTag needs a non-empty tag id")
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other):
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self):
        return hash(("OutputTag", self.tag_id))

    def __repr__(self):
        return f"OutputTag({self.tag_id!r})"
