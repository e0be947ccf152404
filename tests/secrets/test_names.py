"""Secret names (CO-40): the ``${NAME}`` grammar, refused by name with the pattern."""

from __future__ import annotations

import pytest

from shared.secrets import MAX_NAME_CHARS, NAME_PATTERN, InvalidSecretName, validate_name


@pytest.mark.parametrize("name", ["A", "OPENAI_API_KEY", "K8S_TOKEN_2", "A" * MAX_NAME_CHARS])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("", "required"),
        ("openai_key", NAME_PATTERN),
        ("1KEY", NAME_PATTERN),
        ("_KEY", NAME_PATTERN),
        ("MY-KEY", NAME_PATTERN),
        ("MY.KEY", NAME_PATTERN),
        ("KEY\n", NAME_PATTERN),
        ("A/B", NAME_PATTERN),
        ("A" * (MAX_NAME_CHARS + 1), f"limit is {MAX_NAME_CHARS}"),
    ],
)
def test_invalid_names_are_refused_with_the_pattern(name: str, words: str) -> None:
    with pytest.raises(InvalidSecretName) as e:
        validate_name(name)
    assert words in str(e.value)
    assert isinstance(e.value, ValueError)
