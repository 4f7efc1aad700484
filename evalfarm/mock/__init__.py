"""``evalfarm mock-provider``: the scripted local servers that stand in for paid models in tests,
demos and load tests, one module per wire protocol."""
