"""The configuration: the TOML file, its checks, the client's part, where files are kept."""
