namespace gyre {}
