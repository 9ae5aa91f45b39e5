"""A Streamlit client without a browser: one websocket session speaking the browser's own protocol
(/_stcore/stream: BackMsg rerun requests carrying widget states, ForwardMsg deltas back), for load and hostile tests
of the served app. It measures what the server costs (each page run from the request to its end), while a class's
page rendering happens on the students' own machines.

    async with WsSession(url, headers={"X-Forwarded-For": "203.0.113.7"}) as s:
        await s.run("")                                    # the home page (its default widget values)
        await s.run("", home_prompt="The Eiffel Tower is")  # set a widget by its key, then run
        await s.run("causal_tracing", press="FormSubmitter:trace_form-Trace")
        s.texts()                                          # every text the last run drew

Widgets are found by their user key (the tail of Streamlit's element id); a value is sent the way the browser sends
it (text and selections as strings, numbers as int or double, checkboxes as bools, buttons as triggers).
"""
from __future__ import annotations

import asyncio
import time

ELEMENT_WIDGETS = {"text_input": "string_value", "text_area": "string_value", "selectbox": "string_value",
                   "radio": "string_value", "number_input": None, "checkbox": "bool_value",
                   "multiselect": "string_array_value", "slider": "double_array_value", "button": "trigger_value",
                   "toggle": "bool_value"}


def widget_key(element_id: str) -> str:
    """The user key of a widget from its element id ("$$ID-<hash>-<key>"), or the id itself."""
    return element_id.split("-", 2)[2] if element_id.startswith("$$ID-") and element_id.count("-") >= 2 else element_id


class RunEnded(RuntimeError):
    """The script run ended in an exception or was stopped."""


class WsSession:
    """One browser session over a websocket (see module docstring)."""

    def __init__(self, url: str, headers: dict | None = None, timeout: float = 300):
        self.url = url.replace("http", "ws", 1).rstrip("/") + "/_stcore/stream"
        self.headers, self.timeout = headers or {}, timeout
        self.ws = None
        self.states: dict = {}  # element id -> WidgetState (sent with every rerun, as the browser does)
        self.widgets: dict = {}  # key -> (element type, element proto) of the last run
        self.elements: list = []  # (type, proto) drawn by the last run, in order
        self.page, self.query = "", ""

    async def __aenter__(self) -> "WsSession":
        import websockets

        self.ws = await websockets.connect(self.url, max_size=None, subprotocols=["streamlit"],
                                           open_timeout=self.timeout, additional_headers=self.headers)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
            self.ws = None

    def set(self, key: str, value) -> None:
        """Set a widget of the last run by its key (the value is sent with the next run)."""
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        kind, el = self.widgets[key]
        state = WidgetState(id=el.id)
        if kind == "number_input":
            if isinstance(value, int) and el.data_type == el.INT:
                state.int_value = value
            else:
                state.double_value = float(value)
        elif kind == "multiselect":
            state.string_array_value.data.extend(value)
        elif kind == "slider":
            state.double_array_value.data.extend(value if isinstance(value, (list, tuple)) else [value])
        else:
            setattr(state, ELEMENT_WIDGETS[kind], value)
        self.states[el.id] = state

    async def run(self, page: str | None = None, press: str | None = None, until=None, query: str | None = None,
                  **values) -> float:
        """Set `values` (key -> value) on the last run's widgets, press the button `press` (a key) once, run the
        script of `page` (None: the same page; `query`: the URL's query string, e.g. "teacher=1") and read its
        elements until it ends; returns the seconds it took. `until(session)`, if given, is called after each
        delta and may return True to stop reading early (the run goes on on the server: a job's progress, for
        instance)."""
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        if page is not None and page != self.page:
            self.page, self.states, self.widgets = page, {}, {}
        for key, value in values.items():
            self.set(key, value)
        msg = BackMsg()
        msg.rerun_script.page_name = self.page
        if query is not None:
            self.query = query
        msg.rerun_script.query_string = self.query
        for state in self.states.values():
            msg.rerun_script.widget_states.widgets.append(state)
        if press is not None:
            pressed = msg.rerun_script.widget_states.widgets.add()
            pressed.CopyFrom(WidgetState(id=self.widgets[press][1].id, trigger_value=True))
        start = time.time()
        await self.ws.send(msg.SerializeToString())
        await self._read(until)
        return time.time() - start

    async def _read(self, until=None) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self.elements, widgets = [], {}
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(self.ws.recv(), self.timeout))
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "add_block":
                block = fwd.delta.add_block
                if block.WhichOneof("type") == "expandable":
                    self.elements.append(("expander", block.expandable))
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                etype = el.WhichOneof("type")
                proto = getattr(el, etype)
                self.elements.append((etype, proto))
                if etype in ELEMENT_WIDGETS and getattr(proto, "id", ""):
                    widgets[widget_key(proto.id)] = (etype, proto)
                self.widgets.update(widgets)
                if until is not None and until(self):
                    return
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    self.elements, widgets = [], {}
                    continue
                self.widgets = widgets or self.widgets
                if fwd.script_finished != ForwardMsg.FINISHED_SUCCESSFULLY:
                    raise RunEnded(f"the script run ended with status {fwd.script_finished}")
                return

    def texts(self) -> list[str]:
        """The text of every markdown, alert, caption, heading and progress element of the last run."""
        out = []
        for kind, el in self.elements:
            if kind in ("markdown", "alert", "heading"):
                out.append(el.body)
            elif kind == "progress":
                out.append(el.text)
            elif kind == "expander":
                out.append(el.label)
        return out

    def errors(self) -> list[str]:
        """The error boxes and exceptions of the last run."""
        from streamlit.proto.Alert_pb2 import Alert

        out = []
        for kind, el in self.elements:
            if kind == "exception":
                out.append(f"exception: {el.message}")
            elif kind == "alert" and el.format == Alert.ERROR:
                out.append(el.body)
        return out

    def has(self, text: str) -> bool:
        return any(text in t for t in self.texts())
