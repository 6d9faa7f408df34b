"""experiments/lowercase_order.py: the two places to lowercase part on spaCy's case-sensitive abbreviations."""

from experiments.lowercase_order import differences, words_lowercased_after, words_lowercased_first


def test_an_abbreviation_is_one_word_only_when_spacy_sees_it_cased() -> None:
    text = "Mr. Darcy bowed."
    assert words_lowercased_after(text)[:2] == ["mr.", "darcy"]
    assert words_lowercased_first(text)[:3] == ["mr", ".", "darcy"]
    total, differ, found = differences([text, "She smiled."])
    assert (total, differ) == (len(words_lowercased_after(text)) + 3, 2) and found[("mr .", "mr.")] == 1
