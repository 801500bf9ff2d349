"""`tether board`: the person's read-only web page of runs (spec 03, "The person's seat").

`_source` reads runs (this account's own; other accounts' published records plug in as
further sources), `_page` writes the HTML, `_app` serves it behind a token, `_serve`
starts it on loopback.
"""
