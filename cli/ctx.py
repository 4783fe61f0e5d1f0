"""What a command reads its config and Redis through (click's ctx.obj, or the fast path's own), without
click: the config, the thin client and the full one are each made on first use only."""


class Ctx:
    def __init__(self, config_path):
        self.config_path = config_path
        self._cfg = None
        self._client = None
        self._thin = None
        self._books = None

    @property
    def cfg(self):
        if self._cfg is None:
            from labq.scheduler.settings import config as config_mod  # here: `--help` never needs it (issue 39)

            from .out import config_source
            self._cfg = config_mod.load(*config_source(self.config_path))
        return self._cfg

    @property
    def books(self) -> dict:
        """The config's budgets, currency, node prices and source (clientcache.books): from the client
        settings cache once the whole config has been loaded for this file, without loading it again."""
        if self._books is None:
            from labq.scheduler.settings.clientcache import books

            from .out import config_source
            self._books = books(*config_source(self.config_path), full=self._full)
        return self._books

    def _full(self, path):
        from labq.scheduler.settings import config as config_mod
        self._cfg = config_mod.load(path, system=False)      # `path`: resolved (clientcache.books)
        return self._cfg

    @property
    def thin(self):
        """The thin client (no redis-py) of the hot commands, from the config's [redis] table alone."""
        if self._thin is None:
            self._thin = thin_client(self.config_path)
        return self._thin

    @property
    def client(self):
        if self._client is None:
            from labq.scheduler.client import Client

            from .out import url_or_default
            # $LABQ_REDIS_URL, else redis.url, else `labq up`'s private Redis (common.redis_url's rule)
            self._client = Client(self.cfg, url=url_or_default(self.cfg.redis_url))
            from labq.scheduler.store.history import History, path_of
            c = self._client
            url = self.cfg.history["url"]
            c.read.history = History(path_of(url) if url else None, ask=lambda op, body: c._checked(
                c.request(op, body)), get=c.read.text, keys=c.k)
        return self._client


def thin_client(config):
    """The thin client of the config at `config` (or $LABQ_CONFIG, /etc/labq/labq.toml): the fast
    path's and the click commands' (Ctx.thin) alike."""
    from labq.scheduler.settings.clientcache import client_settings
    from labq.scheduler.store.history import History, path_of
    from labq.scheduler.thinclient import ThinClient

    from .out import config_source, url_or_default
    s = client_settings(*config_source(config))
    client = ThinClient(url_or_default(s["redis_url"]), s["prefix"], security=s["security"], currency=s["currency"])
    client.limits, client.allow_volatile = s["limits"], s["allow_volatile"]
    # Archived jobs, opened on a miss; asked of the scheduler where this user cannot open the archive.
    # Where the archive is: the configured history.url, else what the scheduler published in Redis.
    client.read.history = History(path_of(s["history_url"]) if s["history_url"] else None,
                                  ask=lambda op, body: client._checked(client.request(op, body)),
                                  get=client.read.text, keys=client.read.k)
    return client
