"""placeholder"""

def register(verbs):
    pass
