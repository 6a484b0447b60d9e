"""http: Session (requests/urllib3), its connection guard, redirects, decoding, error translation.

Also instrument()'s urllib3 patch. Imports the core and the retry part's classification.
"""
