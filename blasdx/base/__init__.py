"""The ground floor: the exception types and the type table, which every layer above uses and which use nothing
of blasdx themselves."""
