"""The offline test kit: a scripted stub server, an offline tokenizer, fixtures and runners."""
