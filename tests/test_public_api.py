"""The names ``context_os`` exports are the ones we mean to support."""

import context_os


def test_public_names():
    assert sorted(context_os.__all__) == [
        "Assembly",
        "ContextHook",
        "ContextOSError",
        "OpenAIHook",
        "RetentionPolicy",
        "Session",
        "Store",
        "open_store",
    ]
    for name in context_os.__all__:
        assert getattr(context_os, name) is not None
    assert sorted(context_os._HOME) == sorted(context_os.__all__)  # every public name has its home


def test_every_library_error_is_a_context_os_error():
    from context_os import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ContextOSError)
