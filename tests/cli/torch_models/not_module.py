# build() returns something that is not an nn.Module.
def build():
    return {"layers": 3}
