# A script with a syntax error: the trial's error must say so.
import libtune
def train(:
    pass
