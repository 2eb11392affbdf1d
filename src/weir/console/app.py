"""The console's routes on the server's HTTP application (aiohttp, shared with /metrics).

Pages are rendered on the server with Jinja2 (autoescape on: every name, key, header
and value reaches the browser as text). htmx refreshes live numbers and sends the
forms; a Content-Security-Policy allows scripts from this server's own files only, so
even a value that slipped through escaping could not run.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import jinja2
from aiohttp import web

import weir
from weir.broker.topic_admin import UNSET
from weir.broker.topics import ConsumerConfig, short_topic
from weir.console import subscription_views as subs
from weir.console import views
from weir.console.access import Access
from weir.console.history import (
    MAX_LAG_SERIES,
    RateHistory,
    partition_messages,
    read_totals,
)
from weir.console.sessions import Session, Sessions, clear_cookie, set_cookie
from weir.errors import (
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    UnauthorizedError,
    WeirError,
)
from weir.security.authenticator import BearerToken
from weir.security.grants import Permission

if TYPE_CHECKING:
    from weir.broker.broker import Broker
    from weir.metrics import ServerMetrics
    from weir.security import Security

PREFIX = "/console"
LAG_TOPICS_PER_STEP = 50
HERE = Path(__file__).parent
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Listeners:
    """Where this server answers (filled in once it listens)."""

    clients: str = ""
    http: str = ""
    data_dir: str = ""


class NotReady(Exception):
    """The broker is not open (starting, recovering or stopping)."""


class Console:
    """The web console of one server: its routes, its rate history, its templates."""

    def __init__(self, metrics: ServerMetrics, bind_host: str = "127.0.0.1") -> None:
        self.metrics = metrics
        # bound to loopback, only loopback names may reach it: a page of another site
        # whose name was made to resolve to 127.0.0.1 (DNS rebinding) gets nothing
        self.loopback_only = _is_loopback(bind_host)
        self.listeners = Listeners()
        self.started = time.time()
        self.history = RateHistory(
            lambda: read_totals(metrics.observer),
            partitions=self._written,
            lags=self._lags,
        )
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["bytes"] = views.human_bytes
        self.templates.globals["url"] = _url
        # the server's authentication, set once the broker is open (until then every page
        # but the static files answers "not ready": nothing is served before it is known)
        self.security: Security | None = None
        self.sessions = Sessions()

    # ------------------------------------------------------------------ wiring

    def mount(self, app: web.Application) -> None:
        """Add the console's routes (call before any catch-all route)."""
        r = app.router
        r.add_get(PREFIX, self._page(self.overview))
        r.add_get(PREFIX + "/", self._page(self.overview))
        r.add_get(PREFIX + "/live", self._page(self.live))
        r.add_get(PREFIX + "/rates", self.rates)
        r.add_get(PREFIX + "/lag", self.lag)
        r.add_get(PREFIX + "/topics", self._page(self.topics))
        r.add_post(PREFIX + "/topics/create", self._action(self.create_topic))
        r.add_get(PREFIX + "/topic", self._page(self.topic))
        r.add_post(PREFIX + "/topic/alter", self._action(self.alter_topic))
        r.add_post(PREFIX + "/topic/delete", self._action(self.delete_topic))
        r.add_get(PREFIX + "/messages", self._page(self.messages))
        r.add_post(PREFIX + "/messages/write", self._action(self.write_message))
        r.add_get(PREFIX + "/consumers", self._page(self.consumers))
        r.add_post(PREFIX + "/consumers/seek", self._action(self.seek_consumer))
        r.add_get(PREFIX + "/subscriptions", self._page(self.subscriptions))
        r.add_get(PREFIX + "/subscription", self._page(self.subscription))
        r.add_post(PREFIX + "/subscription/seek", self._action(self.seek_subscription))
        r.add_post(PREFIX + "/subscription/skip", self._action(self.skip_subscription))
        r.add_post(PREFIX + "/subscription/delete", self._action(self.delete_subscription))
        r.add_get(PREFIX + "/login", self.login_page)
        r.add_post(PREFIX + "/login", self.login)
        r.add_post(PREFIX + "/logout", self.logout)
        r.add_static(PREFIX + "/static", HERE / "static", append_version=False)
        app.middlewares.append(self._guard)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)

    async def _start(self, _: web.Application) -> None:
        self.history.start()

    async def _stop(self, _: web.Application) -> None:
        await self.history.stop()

    def _written(self) -> dict[tuple[str, str], float]:
        """Messages written per partition of the topics that exist (not dropped ones)."""
        broker = self.metrics.broker
        if broker is None or broker.closed:
            return {}
        names = {short_topic(c.name) for c in broker.list_topics()}
        return {k: v for k, v in partition_messages(self.metrics.observer).items() if k[0] in names}

    async def _lags(self) -> dict[tuple[str, str], int]:
        """Total lag of every consumer (the first MAX_LAG_SERIES), for lag over time; lets
        the loop serve clients every LAG_TOPICS_PER_STEP topics, so no write waits long."""
        broker = self.metrics.broker
        out: dict[tuple[str, str], int] = {}
        if broker is None or broker.closed:
            return out
        for n, cfg in enumerate(broker.list_topics(), 1):
            if n % LAG_TOPICS_PER_STEP == 0:
                await asyncio.sleep(0)
                if broker.closed:
                    return out
            if not cfg.consumers:
                continue
            try:
                parts = broker.partitions(cfg.name)
            except (KeyError, WeirError):  # dropped meanwhile
                continue
            name = short_topic(cfg.name)
            for consumer in cfg.consumers:
                if len(out) >= MAX_LAG_SERIES:
                    return out
                lag = 0
                for p in parts:  # as describe_consumer counts it, without its look-ups
                    committed = broker.offsets.get(cfg.topic_id, p.partition, consumer)
                    start = p.start_offset if committed is None else max(committed, p.start_offset)
                    lag += max(0, p.end_offset - start)
                out[(name, consumer)] = lag
        return out

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        return await _security_headers(self, request, self._authenticated(handler))

    def _authenticated(self, handler: Handler) -> Handler:
        """Who asks: with authentication on, the session's principal (else to the login
        page); without it, anonymous, who may do everything (as on every front)."""

        async def handle(request: web.Request) -> web.StreamResponse:
            path = request.path
            if not path.startswith(PREFIX) or path.startswith(PREFIX + "/static/"):
                return await handler(request)
            security = self.security
            if security is None:
                return self.render(
                    request, "error.html", 503, title="Not ready", message=_NOT_READY
                )
            if security.allow_anonymous:
                request["access"] = Access(security)
                return await handler(request)
            if path == PREFIX + "/login":
                return await handler(request)
            session = self.sessions.of(request)
            principal = None
            if session is not None:
                try:
                    principal = security.authenticate(session.credential)
                except WeirError:  # the user was deleted, its password changed, expired
                    self.sessions.close(session)
                    session = None
            if session is None or principal is None:
                return self._to_login(request)
            request["session"] = session
            request["access"] = Access(security, principal)
            return await handler(request)

        return handle

    def _to_login(self, request: web.Request) -> web.StreamResponse:
        back = request.path_qs if request.method == "GET" else PREFIX
        target = _url("/login", next=back if back != PREFIX + "/login" else None)
        if request.headers.get("HX-Request") == "true":  # a live refresh: the whole page goes
            return web.Response(status=401, text="log in again\n", headers={"HX-Redirect": target})
        if request.method != "GET" or request.path in (PREFIX + "/rates", PREFIX + "/lag"):
            return web.json_response({"error": "log in first"}, status=401)
        raise web.HTTPSeeOther(target)

    @property
    def broker(self) -> Broker:
        broker = self.metrics.broker
        if broker is None or broker.closed or not self.metrics.ready:
            raise NotReady
        return broker

    def render(
        self, request: web.Request, name: str, status: int = 200, **values: Any
    ) -> web.Response:
        values.setdefault("note", "")
        values.setdefault("page", "")
        session: Session | None = request.get("session")
        body = self.templates.get_template(name).render(
            prefix=PREFIX,
            user=session.user if session is not None else "",
            csrf=session.csrf if session is not None else "",
            **values,
        )
        return web.Response(status=status, text=body, content_type="text/html", charset="utf-8")

    def _page(self, view: Callable[[web.Request], web.Response]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return view(request)
            except NotReady:
                return self.render(
                    request, "error.html", 503, title="Not ready", message=_NOT_READY
                )
            except WeirError as err:
                return self.render(
                    request, "error.html", _status(err), title="Error", message=err.message
                )

        return handle

    def _action(self, act: Callable[[web.Request, dict[str, str]], Awaitable[str]]) -> Handler:
        """A form post: checked to come from this console, then done; an htmx post gets the
        next page's address (HX-Redirect) or the error as a fragment, a plain one a 303."""

        async def handle(request: web.Request) -> web.StreamResponse:
            if not _same_origin(request):
                return web.Response(status=403, text="cross-site form posts are refused\n")
            form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
            session: Session | None = request.get("session")
            if session is not None and not session.csrf_ok(form.get("csrf", "")):
                return web.Response(status=403, text="this form is stale: reload the page\n")
            htmx = request.headers.get("HX-Request") == "true"
            status = 400
            try:
                target = await act(request, form)
            except NotReady:
                message = _NOT_READY
            except WeirError as err:
                message, status = err.message, _status(err)
            else:
                if htmx:
                    return web.Response(text="", headers={"HX-Redirect": target})
                raise web.HTTPSeeOther(target)
            if htmx:
                return self.render(request, "flash.html", message=message)
            return self.render(request, "error.html", status, title="Not done", message=message)

        return handle

    # ------------------------------------------------------------------ pages

    def overview(self, request: web.Request) -> web.Response:
        return self.render(request, "overview.html", page="overview", **self._overview(request))

    def live(self, request: web.Request) -> web.Response:
        return self.render(request, "live.html", **self._overview(request))

    def _overview(self, request: web.Request) -> dict[str, Any]:
        broker = self.broker
        me = _access(request)
        usage = broker.store.kv.usage()
        topics = [t for t in broker.list_topics() if me.can_see(t.name)]
        last = self.history.samples[-1] if self.history.samples else None
        return {
            "version": weir.__version__,
            "uptime": _duration(time.time() - self.started),
            "started": views.timestamp(int(self.started * 1000)),
            "listeners": self.listeners,
            "superuser": me.superuser,
            "usage": usage,
            "generation": broker.generation,
            "topics": len(topics),
            "partitions": sum(t.partitions for t in topics),
            "consumers": sum(len(t.consumers) for t in topics),
            "pending": broker.store.committer.pending,
            "last": last,
            "interval": self.history.interval,
        }

    async def rates(self, request: web.Request) -> web.Response:
        return web.json_response(self.history.series())

    async def lag(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic", "")
        try:
            _access(request).require(Permission.CONSUME, topic, "describe the consumers of")
        except WeirError as err:
            return web.json_response({"error": err.message}, status=_status(err))
        return web.json_response(self.history.lag_series(topic))

    def topics(self, request: web.Request) -> web.Response:
        me = _access(request)
        rows = views.topic_rows(self.broker, me.can_see)
        rates = self.history.topic_rates
        query = request.query.get("q", "")
        if query:
            rows = [r for r in rows if query.lower() in r.name.lower()]
        sparks = {r.name: views.sparkline(list(rates.get(r.name, ()))) for r in rows}
        return self.render(
            request,
            "topics.html",
            page="topics",
            rows=rows,
            sparks=sparks,
            q=query,
            may_create=me.may_create(),
            note=request.query.get("note", ""),
        )

    def topic(self, request: web.Request) -> web.Response:
        name = _required(request.query, "name")
        me = _access(request)
        me.require(None, name, "describe")
        can = me.flags(name)
        broker = self.broker
        detail = views.topic_detail(
            broker, name, self.history.partition_rates, with_consumers=can["consume"]
        )
        subscriptions = subs.subscription_rows(broker, name, me.can_see) if can["consume"] else []
        return self.render(
            request,
            "topic.html",
            page="topics",
            t=detail,
            can=can,
            subs=subscriptions,
            note=request.query.get("note", ""),
        )

    def messages(self, request: web.Request) -> web.Response:
        q = request.query
        name = _required(q, "topic")
        me = _access(request)
        me.require(None, name, "describe")
        can = me.flags(name)
        at = q.get("time", "").strip()
        offset = q.get("offset", "").strip()
        page = views.browse(
            self.broker,
            name,
            _int(q.get("partition", "0"), "partition"),
            offset=_int(offset, "offset") if offset and not at else None,
            at_ms=views.parse_time(at) if at else None,
            limit=_int(q.get("limit", str(views.PAGE_SIZE)), "page size"),
            read=can["consume"],  # else only the write form, for one who may produce
        )
        return self.render(
            request,
            "messages.html",
            page="topics",
            p=page,
            can=can,
            note=q.get("note", ""),
            time=at,
        )

    def consumers(self, request: web.Request) -> web.Response:
        me = _access(request)
        rows = views.all_consumers(self.broker, lambda t: me.can(Permission.CONSUME, t))
        return self.render(
            request,
            "consumers.html",
            page="consumers",
            rows=rows,
            note=request.query.get("note", ""),
        )

    def subscriptions(self, request: web.Request) -> web.Response:
        me = _access(request)
        topic = request.query.get("topic", "").strip() or None
        if topic is not None:
            me.require(Permission.CONSUME, topic, "list the subscriptions of")
        rows = subs.subscription_rows(self.broker, topic, lambda t: me.can(Permission.CONSUME, t))
        return self.render(
            request,
            "subscriptions.html",
            page="subscriptions",
            rows=rows,
            topic=topic or "",
            note=request.query.get("note", ""),
        )

    def subscription(self, request: web.Request) -> web.Response:
        topic, name = _required(request.query, "topic"), _required(request.query, "name")
        _access(request).require(Permission.CONSUME, topic, "describe a subscription of", name)
        detail = subs.subscription_detail(self.broker, topic, name)
        return self.render(
            request,
            "subscription.html",
            page="subscriptions",
            s=detail,
            note=request.query.get("note", ""),
        )

    # ------------------------------------------------------------------ actions

    async def create_topic(self, request: web.Request, form: dict[str, str]) -> str:
        name = _required(form, "name").strip()
        _access(request).require(Permission.ADMIN, name, "create")
        consumers = [ConsumerConfig(c.strip()) for c in form.get("consumers", "").split(",")]
        cfg = await self.broker.create_topic(
            name,
            partitions=_int(form.get("partitions", "1") or "1", "partitions"),
            retention_ms=_retention(form.get("retention_hours", ""), empty=UNSET),
            consumers=[c for c in consumers if c.name],
        )
        return _url("/topic", name=short_topic(cfg.name), note=f"created topic {name}")

    async def alter_topic(self, request: web.Request, form: dict[str, str]) -> str:
        name = _required(form, "name")
        _access(request).require(Permission.ADMIN, name, "alter")
        partitions = form.get("partitions", "").strip()
        await self.broker.alter_topic(
            name,
            partitions=_int(partitions, "partitions") if partitions else None,
            retention_ms=_retention(form.get("retention_hours", ""), empty=UNSET),
        )
        return _url("/topic", name=name, note=f"altered topic {name}")

    async def delete_topic(self, request: web.Request, form: dict[str, str]) -> str:
        name = _required(form, "name")
        _access(request).require(Permission.ADMIN, name, "drop")
        if form.get("confirm") != name:
            raise BadRequestError(f"type the topic's name ({name}) to confirm deleting it")
        await self.broker.drop_topic(name)
        return _url("/topics", note=f"deleted topic {name}")

    async def write_message(self, request: web.Request, form: dict[str, str]) -> str:
        name = _required(form, "topic")
        _access(request).require(Permission.PRODUCE, name, "write to")
        partition = _int(form.get("partition", "0"), "partition")
        offset = await views.write_test_message(
            self.broker,
            name,
            partition,
            form.get("key", ""),
            form.get("value", ""),
            views.parse_headers(form.get("headers", "")),
        )
        return _url(
            "/messages",
            topic=name,
            partition=partition,
            offset=offset,
            note=f"wrote offset {offset} of partition {partition}",
        )

    async def seek_consumer(self, request: web.Request, form: dict[str, str]) -> str:
        name, consumer = _required(form, "topic"), _required(form, "consumer")
        _access(request).require(Permission.CONSUME, name, "commit an offset of", consumer)
        broker = self.broker
        cfg = broker.topic(name)
        broker.consumer(name, consumer)
        where = form.get("to", "").strip()
        chosen = form.get("partition", "").strip()
        parts = range(cfg.partitions) if chosen in ("", "all") else [_int(chosen, "partition")]
        for p in parts:
            actor = broker.actor(name, p)
            if where == "start":
                offset = actor.start_offset
            elif where == "end":
                offset = actor.end_offset
            elif where.startswith("time:"):
                offset = actor.log.offset_for_time(views.parse_time(where[5:]))
            else:
                offset = _int(where, "offset")
                if offset < 0:
                    raise BadRequestError(f"offset must not be negative, got {offset}")
            await broker.commit_offset(name, p, consumer, offset, allow_backwards=True)
        return _url("/consumers", note=f"moved consumer {consumer} of {name} to {where}")

    def _subscription_form(
        self, request: web.Request, form: dict[str, str], what: str
    ) -> tuple[str, str]:
        topic, name = _required(form, "topic"), _required(form, "name")
        _access(request).require(Permission.CONSUME, topic, what, name)
        return topic, name

    async def seek_subscription(self, request: web.Request, form: dict[str, str]) -> str:
        topic, name = self._subscription_form(request, form, "seek a subscription of")
        done = await subs.seek(
            self.broker, topic, name, form.get("to", ""), form.get("partition", "")
        )
        return _url("/subscription", topic=topic, name=name, note=done)

    async def skip_subscription(self, request: web.Request, form: dict[str, str]) -> str:
        topic, name = self._subscription_form(request, form, "skip messages of a subscription of")
        done = await subs.skip(
            self.broker, topic, name, form.get("count", ""), form.get("partition", "")
        )
        return _url("/subscription", topic=topic, name=name, note=done)

    async def delete_subscription(self, request: web.Request, form: dict[str, str]) -> str:
        topic, name = self._subscription_form(request, form, "delete a subscription of")
        done = await subs.delete(
            self.broker, topic, name, form.get("confirm", ""), form.get("force") == "on"
        )
        return _url("/subscriptions", topic=topic, note=done)

    # ------------------------------------------------------------------ login

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        security = self.security
        if security is None or security.allow_anonymous:  # nothing to log in to
            raise web.HTTPSeeOther(PREFIX)
        return self.render(request, "login.html", next=_next(request.query), message="")

    async def login(self, request: web.Request) -> web.StreamResponse:
        """A user and password (checked off the loop: scrypt is slow on purpose, and
        throttled and audited as every login) or a token; a new session either way."""
        security = self.security
        if security is None or security.allow_anonymous:
            raise web.HTTPSeeOther(PREFIX)
        if not _same_origin(request):
            return web.Response(status=403, text="cross-site form posts are refused\n")
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        user, token = form.get("user", "").strip(), form.get("token", "").strip()
        try:
            if token:
                principal = security.authenticate(BearerToken(token))
            elif user:
                issued = await asyncio.to_thread(
                    security.login, user, form.get("password", ""), request.remote or ""
                )
                token = issued.token
                principal = security.authenticate(BearerToken(token))
            else:
                raise UnauthorizedError("give a user and password, or a token")
        except WeirError as err:
            return self.render(
                request, "login.html", 401, next=_next(form), message=err.message, user_name=user
            )
        session = self.sessions.open(principal.name, token)
        response = web.HTTPSeeOther(_next(form))
        set_cookie(response, session, secure=request.secure, path=PREFIX)
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session: Session | None = request.get("session")
        if session is not None:
            form = await request.post()
            sent = form.get("csrf", "")
            if not _same_origin(request) or not session.csrf_ok(
                sent if isinstance(sent, str) else ""
            ):
                return web.Response(status=403, text="this form is stale: reload the page\n")
            self.sessions.close(session)
        response = web.HTTPSeeOther(_url("/login"))
        clear_cookie(response, PREFIX)
        raise response


_NOT_READY = "the server is starting, recovering its data or shutting down; try again shortly"


def _access(request: web.Request) -> Access:
    access: Access = request["access"]
    return access


def _status(err: WeirError) -> int:
    if isinstance(err, UnauthorizedError):
        return 401
    if isinstance(err, PermissionDeniedError):
        return 403
    if isinstance(err, NotFoundError):
        return 404
    return 400


def _next(values: Any) -> str:
    """Where to go after the login: a console page of this server, nothing else."""
    target = values.get("next", "")
    if (
        isinstance(target, str)
        and target.startswith(PREFIX)
        and not target.startswith(PREFIX + "/login")
        and "\\" not in target
        and target.isprintable()
        and " " not in target
        and urlsplit(target).netloc == ""
    ):
        return target
    return PREFIX


def _url(path: str, **query: object) -> str:
    q = {k: v for k, v in query.items() if v is not None and v != ""}
    return PREFIX + path + ("?" + urlencode(q) if q else "")


def _required(values: Any, key: str) -> str:
    value = values.get(key, "")
    if not isinstance(value, str) or not value.strip():
        raise BadRequestError(f"{key} is required")
    return value


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BadRequestError(f"{what} must be a whole number, got {text[:40]!r}") from None


def _retention(hours: str, empty: Any) -> Any:
    """Hours as typed in a form: 0 keeps messages forever, empty gives ``empty``."""
    hours = hours.strip()
    if not hours:
        return empty
    try:
        value = float(hours)
    except ValueError:
        raise BadRequestError(f"retention must be a number of hours, got {hours[:40]!r}") from None
    if value < 0:
        raise BadRequestError(f"retention must not be negative, got {hours!r}")
    return int(value * 3_600_000) or None


def _duration(seconds: float) -> str:
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}d " if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def _same_origin(request: web.Request) -> bool:
    """A browser names the page a form comes from; refuse other sites' (CSRF)."""
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(request: web.Request) -> str:
    return urlsplit("//" + request.host).hostname or ""


async def _security_headers(
    console: Console, request: web.Request, handler: Handler
) -> web.StreamResponse:
    """Refuse rebinding hosts; add the script policy and no-sniff to the console's pages."""
    if (
        request.path.startswith(PREFIX)
        and console.loopback_only
        and not _is_loopback(_hostname(request))
    ):
        return web.Response(
            status=403,
            text="the console on a loopback address answers only to loopback names "
            "(127.0.0.1, localhost)\n",
        )
    response = await handler(request)
    if request.path.startswith(PREFIX):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cache-Control", "no-store")
    return response
