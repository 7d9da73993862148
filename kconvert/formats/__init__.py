"""Producers → one DraftModel. `detect` says which producer wrote a checkpoint (adding a producer means adding one
module here and listing it in `detect.PRODUCERS`), `aux` where its aux ids are and in which convention, `canonical`
describes it as one `DraftModel` under canonical names (`model`); `layouts` holds the key layouts as data."""
