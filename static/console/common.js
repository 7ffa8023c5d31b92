// Shared by every console page: formatting (unknown is "-", never 0), the
// API calls, and live updates (Channels push, polling as the fallback).
(function () {
  "use strict";
  const DASH = "-";
  const known = (v) => v !== null && v !== undefined && !(typeof v === "number" && !isFinite(v));
  const fmt = {
    dash: (v) => (known(v) && v !== "" ? String(v) : DASH),
    pct: (v) => (known(v) ? `${Math.round(v)}%` : DASH),
    num: (v, d = 1) => (known(v) ? Number(v).toFixed(d) : DASH),
    // As llmgw.units.format_bytes prints them, so a page and the CLI read
    // alike: binary units with their names, three significant figures.
    bytes(v) {
      if (!known(v)) return DASH;
      const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
      let i = 0;
      let x = Number(v);
      while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
      if (!i) return `${Math.trunc(x)} B`;
      const digits = Math.abs(x) < 10 ? 2 : Math.abs(x) < 100 ? 1 : 0;
      return `${x.toFixed(digits)} ${units[i]}`;
    },
    gib(v) { return fmt.bytes(v); },
    rate: (bps) => (known(bps) ? (bps >= 1e9 ? `${(bps / 1e9).toFixed(1)} GB/s` : `${(bps / 1e6).toFixed(1)} MB/s`) : DASH),
    age(s) {
      if (!known(s)) return DASH;
      if (s < 90) return `${Math.round(s)} s`;
      if (s < 5400) return `${Math.round(s / 60)} min`;
      if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
      return `${Math.round(s / 86400)} d`;
    },
  };

  // A moment as "3 min ago", its date, time and zone on hover (a bare
  // "11:47" says neither which day nor whose clock).
  function full(iso) {
    return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "long" });
  }
  function when(iso, prefix) {
    if (!iso) return document.createTextNode(DASH);
    const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
    return el("time", { datetime: iso, title: full(iso) }, `${prefix || ""}${fmt.age(s)} ago`);
  }

  function csrf() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function request(method, url, body) {
    const opts = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.headers["X-CSRFToken"] = csrf();
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(url, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    return { ok: r.ok, status: r.status, data };
  }

  async function getJSON(url) {
    const r = await request("GET", url);
    if (!r.ok) throw new Error(`${url}: ${r.status} ${(r.data && r.data.detail) || ""}`);
    return r.data;
  }

  // el("td", {class: "x"}, "text" | Node | [children])
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of [].concat(children === undefined ? [] : children)) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function meter(percent, cls) {
    if (!known(percent)) return document.createTextNode(DASH);
    const span = el("span", { style: `width:${Math.max(0, Math.min(100, percent)).toFixed(0)}%` });
    return el("span", {}, [el("span", { class: `meter ${cls || ""}` }, span), ` ${fmt.pct(percent)}`]);
  }

  // Refresh on a pushed event of one of `kinds`, and every `pollMs` anyway:
  // with the in-memory channel layer, events from other processes never come.
  function live(kinds, pollMs, refresh) {
    const badge = document.getElementById("live");
    let timer = null;
    let pending = false;
    const run = async (why) => {
      if (pending) return;
      pending = true;
      try { await refresh(why); } catch (e) { console.warn("refresh failed:", e.message); }
      finally { pending = false; }
    };
    const schedule = () => { clearTimeout(timer); timer = setTimeout(() => { run("poll"); schedule(); }, pollMs); };
    schedule();
    let delay = 1000;
    const connect = () => {
      const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/console`);
      ws.onopen = () => { delay = 1000; if (badge) { badge.textContent = "live"; badge.className = "live on"; } };
      ws.onmessage = (msg) => {
        let ev;
        try { ev = JSON.parse(msg.data); } catch (e) { return; }
        if (!kinds.includes(ev.kind)) return;
        document.body.dataset.pushes = String(Number(document.body.dataset.pushes || 0) + 1);
        run(ev);
        schedule();
      };
      ws.onclose = () => {
        if (badge) { badge.textContent = `polling every ${Math.round(pollMs / 1000)} s`; badge.className = "live off"; }
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 30000);
      };
      ws.onerror = () => {};  // onclose follows and says so on the badge
    };
    connect();
    return run;
  }

  window.LG = { fmt, known, request, getJSON, el, meter, live, when, full, DASH };
})();
