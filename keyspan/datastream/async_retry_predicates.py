"""Ready-made conditions for ``async_retry_strategies`` (``pyflink.datastream.async_retry_predicates``)."""


def empty_result_predicate(result: list) -> bool:
    return result is None or len(result) == 0


def has_exception_predicate(error) -> bool:
    return error is not None


def exception_type_predicate(error, expected_error_type) -> bool:
    return isinstance(error, expected_error_type)
