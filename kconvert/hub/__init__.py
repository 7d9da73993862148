"""Publishing to the Hub: the binding of a verify report to the files it measured (`binding`), the model card
(`card`), and the one commit (`upload`). `kconvert.push` runs them in that order."""
