// /admin/fabrics: one physical fabric's map, zoomable, searchable, live.
(function () {
  "use strict";
  const { el, fmt } = LG;
  const $ = (id) => document.getElementById(id);
  const stage = $("stage"), canvas = $("canvas"), overlaySvg = $("overlay"), viewport = $("viewport");
  const panel = $("panel");
  const st = { t: d3.zoomIdentity, dpr: window.devicePixelRatio || 1, mode: "rate", focus: null, pinned: null };
  let L = null, layer = null, data = null, fabricId = null, drawn = false, frame = 0;

  function resize() {
    const r = stage.getBoundingClientRect();
    canvas.width = Math.round(r.width * st.dpr); canvas.height = Math.round(r.height * st.dpr);
    canvas.style.width = `${r.width}px`; canvas.style.height = `${r.height}px`;
    // Fitted and untouched since: still fitted, to the stage as it is now.
    if (L && st.fitted) fit(); else redraw();
  }
  function redraw() {
    if (!L || frame) return;
    frame = requestAnimationFrame(() => { frame = 0; FabricDraw.paint(canvas, L, st); });
  }

  const zoom = d3.zoom().scaleExtent([0.02, 12]).on("zoom", (ev) => {
    st.t = ev.transform;
    viewport.setAttribute("transform", ev.transform.toString());
    overlaySvg.classList.toggle("far", ev.transform.k < 0.45);
    if (ev.sourceEvent) { $("tip").hidden = true; st.fitted = false; }
    redraw();
  });
  d3.select(overlaySvg).call(zoom).on("dblclick.zoom", null);

  // `right`: room kept clear on the right, where the panel opens.
  function fit(box, pad = 40, animate = false, right = 0) {
    const r = stage.getBoundingClientRect(), w = r.width - right;
    const [[x0, y0], [x1, y1]] = box || L.extent;
    const k = Math.min(8, (w - 2 * pad) / Math.max(1, x1 - x0), (r.height - 2 * pad) / Math.max(1, y1 - y0));
    const t = d3.zoomIdentity.translate(w / 2 - (k * (x0 + x1)) / 2, r.height / 2 - (k * (y0 + y1)) / 2).scale(k);
    st.fitted = !box && !right;
    (animate ? d3.select(overlaySvg).transition().duration(500) : d3.select(overlaySvg)).call(zoom.transform, t);
  }

  // What a switch or adapter touches: its neighbours, its adapters, its cables.
  function touching(item) {
    const f = { switches: new Set(), adapters: new Set(), bundles: new Set() };
    if (item.kind === "adapter") {
      f.adapters.add(item.guid); f.switches.add(item.leaf.guid);
      for (const ad of L.adapters) if (ad.node && ad.node === item.node) { f.adapters.add(ad.guid); f.switches.add(ad.leaf.guid); }
    } else {
      f.switches.add(item.guid);
      for (const b of L.bundles) if (b.lo === item || b.hi === item) { f.bundles.add(b.key); f.switches.add(b.lo.guid); f.switches.add(b.hi.guid); }
      for (const ad of L.adapters) if (ad.leaf === item) f.adapters.add(ad.guid);
    }
    return f;
  }
  function focus(f) {
    st.focus = f;
    for (const [guid, n] of layer.switches) n.classList.toggle("faded", Boolean(f) && !f.switches.has(guid));
    layer.live.classList.toggle("faded", Boolean(f));
    redraw();
  }

  function nearestAdapter(ev) {
    const [mx, my] = d3.pointer(ev, overlaySvg);
    const [wx, wy] = st.t.invert([mx, my]);
    const found = L.tree.find(wx, wy, 8 / Math.min(st.t.k, 1));
    return found || null;
  }

  function row(k, v, cls) { return el("tr", {}, [el("th", {}, k), el("td", { class: cls || "" }, v)]); }
  function showPanel(item) {
    const body = panel.querySelector(".body");
    let rows;
    if (item.kind === "adapter") {
      const p = item.live, misal = (data.map.rail_misalignment || []).find((m) => m.adapter_guid === item.guid);
      const up = p && String(p.state || "").startsWith("ACTIVE") && p.phys_state === "LinkUp";
      rows = [el("h2", {}, `${item.node || "-"} ${item.device || ""}`),
        el("table", { class: "kv-table" }, [
          row("Description", item.description), row("GUID", item.guid), row("LID", fmt.dash(item.lid)),
          row("Rate", item.rate_text || fmt.dash(item.rate)), row("Leaf", `${FabricDraw.shortName(item.leaf.description)} port ${fmt.dash(item.leaf_port)}`),
          row("Rail", item.leaf.rail ? `${item.leaf.rail}${misal ? ` — this adapter belongs on ${misal.device}'s leaf` : ""}` : "-", misal ? "warn" : ""),
          row("Port", p ? `${p.state || "-"} / ${p.phys_state || "-"}` : "not one of ours", p ? (up ? "ok" : "bad") : "dim"),
          row("Sending", p && p.bps ? fmt.rate(p.bps.xmit) : "-"), row("Receiving", p && p.bps ? fmt.rate(p.bps.rcv) : "-"),
        ]),
        p ? el("p", {}, el("a", { href: `/nodes/${encodeURIComponent(item.node)}` }, `Open ${item.node}`)) : ""];
    } else {
      const deg = L.degraded.filter((d) => d.p === item || d.q === item);
      rows = [el("h2", {}, FabricDraw.shortName(item.description)),
        el("table", { class: "kv-table" }, [
          row("Description", item.description), row("Tier", item.tier), row("GUID", item.guid), row("LID", fmt.dash(item.lid)),
          row("Ports", `${item.connected_ports} of ${fmt.dash(item.ports)} connected`), row("Adapters", String(item.adapters)),
          row("Rail", fmt.dash(item.rail)),
        ]),
        deg.length ? el("div", { class: "bad" }, [el("h3", {}, "Degraded cables"), el("ul", {}, deg.map((d) =>
          el("li", {}, `${d.a.description} [${d.a.port}] – ${d.b.description} [${d.b.port}]: ${d.rate_text} (expected ${d.expected_rate_text})`)))]) : ""];
    }
    body.replaceChildren(...rows);
    panel.hidden = false;
    panel.dataset.guid = item.guid;
  }

  function findNode(text) {
    const q = text.trim().toLowerCase();
    if (!q || !L) return false;
    let hits = L.adapters.filter((a) => (a.node || "").toLowerCase() === q);
    if (!hits.length) hits = L.adapters.filter((a) => (a.node || a.description).toLowerCase().includes(q));
    layer.marks.replaceChildren();
    if (!hits.length) { $("find-node").setCustomValidity("no adapter of that node on this fabric"); $("find-node").reportValidity(); return false; }
    $("find-node").setCustomValidity("");
    for (const a of hits) FabricDraw.svg("circle", { cx: a.x, cy: a.y, r: 9, class: "found" }, layer.marks);
    const xs = hits.map((a) => a.x), ys = hits.map((a) => a.y);
    fit([[Math.min(...xs) - 60, Math.min(...ys) - 120], [Math.max(...xs) + 60, Math.max(...ys) + 40]], 60, true, 340);
    st.pinned = touching(hits[0]); focus(st.pinned);
    showPanel(hits[0]);
    return true;
  }

  async function loadPorts() {
    if (!L) return;
    const d = await LG.getJSON("/console/api/ports");
    const s = FabricLive.update(L, layer, d.ports);
    stage.dataset.live = String(s.matched); stage.dataset.down = String(s.down);
    showFindings();
    if (!panel.hidden && panel.dataset.guid) { const a = L.adapterByGuid.get(panel.dataset.guid); if (a) showPanel(a); }
  }

  async function loadMap() {
    const list = await LG.getJSON("/api/v1/fabrics");
    const mapped = list.fabrics.filter((f) => f.map && f.map.summary);
    const sel = $("fabric");
    sel.replaceChildren(...list.fabrics.map((f) => el("option", { value: f.id }, `${f.identity}${f.names.length ? ` (${f.names.join(", ")})` : ""}${f.map && f.map.summary ? "" : " — not mapped"}`)));
    const wanted = Number(new URLSearchParams(location.search).get("fabric")) || fabricId || (mapped[0] || list.fabrics[0] || {}).id;
    if (!wanted) { empty("No fabric seen yet: a node's agent reports its ports and subnet managers."); return; }
    sel.value = String(wanted);
    const r = await LG.request("GET", `/api/v1/fabrics/${wanted}/topology`);
    if (!r.ok) { empty(`This fabric has no map yet${r.data && r.data.error ? `: ${r.data.error}` : ""}.`); return; }
    const keep = drawn && fabricId === wanted;
    // The same map again (a poll): only the ports move.
    if (keep && data && r.data.taken_at === data.taken_at) { await loadPorts(); return; }
    fabricId = wanted;
    data = r.data;
    // The summary first: its lines decide how tall the stage is, and the layout fits the stage.
    const s = data.map.summary;
    $("fabric-summary").textContent = `${s.switches} switches (${s.core} core, ${s.spine} spine, ${s.leaf} leaf) · ${s.host_adapters} adapters · ${s.links} cables · ${s.degraded_links} degraded · ${s.problems || 0} cabling problems · ${s.rail_optimised ? `rail-optimised, ${s.misaligned_rails} off their rail` : "not rail-optimised"} · mapped ${data.taken_at ? new Date(data.taken_at).toLocaleString() : "-"} from ${data.source_node || "-"}`;
    const box = stage.getBoundingClientRect();
    L = FabricLayout.layout(data.map, { width: box.width, height: box.height });
    L.tree = d3.quadtree(L.adapters, (a) => a.x, (a) => a.y);
    layer = FabricDraw.overlay(viewport, L, st.mode);
    FabricDraw.legend($("legend"), L, st.mode);
    showFindings();
    $("node-names").replaceChildren(...[...new Set(L.adapters.map((a) => a.node).filter(Boolean))].sort().map((n) => el("option", { value: n })));
    $("empty").hidden = true; $("findings").hidden = false;
    bind();
    if (!keep) fit(); else redraw();
    if (st.pinned) focus(null);
    st.pinned = null;
    await loadPorts().catch((e) => console.warn(e.message));
    if (!drawn) {
      // Marked after the frame that shows it, for the benchmark and the tests.
      requestAnimationFrame(() => requestAnimationFrame(() => {
        FabricDraw.paint(canvas, L, st);
        performance.mark("fabric-drawn");
        stage.dataset.drawn = "1";
      }));
      drawn = true;
    }
  }

  // The side list of findings; a click zooms to one, lights it and opens its panel.
  function showFindings() {
    FabricFindings.render($("findings"), FabricFindings.build(L, data.map), pick);
    const on = $("findings").querySelector(`li[data-key="${CSS.escape(stage.dataset.finding || "")}"]`);
    if (on) on.classList.add("on");
  }
  function pick(f, li) {
    if (!f || !f.items.length) return;
    for (const x of $("findings").querySelectorAll("li.on")) x.classList.remove("on");
    li.classList.add("on");
    stage.dataset.finding = f.key;
    showPanel(f.items.find((it) => it.kind === "adapter") || f.items[0]);
    FabricFindings.mark(layer, f);
    st.pinned = FabricFindings.focusOf(L, f); focus(st.pinned);
    fit(FabricFindings.box(f), 40, true, 340);
  }

  function empty(text) { $("findings").hidden = true; $("empty").textContent = text; $("empty").hidden = false; stage.dataset.drawn = "empty"; }

  function bind() {
    for (const [guid, n] of layer.switches) {
      const s = L.switches.get(guid);
      n.addEventListener("mouseenter", () => { tip(s); if (!st.pinned) focus(touching(s)); });
      n.addEventListener("mouseleave", () => { tip(null); if (!st.pinned) focus(null); });
      n.addEventListener("focus", () => tip(s));
      n.addEventListener("blur", () => tip(null));
      n.addEventListener("click", (ev) => { ev.stopPropagation(); showPanel(s); });
    }
  }

  // A switch's name, GUID and ports beside it while pointed at: its label is
  // clipped to its box, and too small to read when the whole map is in view.
  function tip(s) {
    const box = $("tip");
    if (!s) { box.hidden = true; return; }
    const deg = L.degraded.filter((d) => d.p === s || d.q === s).length;
    box.replaceChildren(el("b", {}, FabricDraw.shortName(s.description)), el("div", { class: "dim" }, s.description),
      el("div", {}, `${s.tier} · GUID ${s.guid}${s.lid != null ? ` · LID ${s.lid}` : ""}`),
      el("div", {}, `ports: ${s.connected_ports} of ${fmt.dash(s.ports)} connected · ${s.adapters} adapters${s.rail ? ` · ${s.rail}` : ""}`),
      deg ? el("div", { class: "bad" }, `${deg} degraded cable${deg > 1 ? "s" : ""}`) : "");
    const [x, y] = st.t.apply([s.x, s.y + s.h / 2]), r = stage.getBoundingClientRect();
    box.hidden = false;
    box.style.left = `${Math.max(4, Math.min(r.width - box.offsetWidth - 4, x - box.offsetWidth / 2))}px`;
    box.style.top = `${y + 8 + box.offsetHeight < r.height ? y + 8 : Math.max(4, y - s.h - box.offsetHeight - 8)}px`;
    box.dataset.guid = s.guid;
  }

  let hovered = null;
  overlaySvg.addEventListener("mousemove", (ev) => {
    if (!L || st.pinned || ev.buttons) return;
    if (ev.target.closest && ev.target.closest(".switch")) return;
    const a = nearestAdapter(ev);
    if (a === hovered) return;
    hovered = a;
    overlaySvg.style.cursor = a ? "pointer" : "";
    focus(a ? touching(a) : null);
  });
  overlaySvg.addEventListener("click", (ev) => {
    if (!L || (ev.target.closest && ev.target.closest(".switch"))) return;
    const a = nearestAdapter(ev);
    if (a) showPanel(a);
  });
  panel.querySelector(".close").addEventListener("click", () => {
    panel.hidden = true; st.pinned = null; focus(null); layer.marks.replaceChildren();
    delete stage.dataset.finding;
    for (const x of $("findings").querySelectorAll("li.on")) x.classList.remove("on");
  });
  $("find").addEventListener("submit", (ev) => { ev.preventDefault(); findNode($("find-node").value); });
  $("fit").addEventListener("click", () => fit(null, 40, true));
  $("mode").addEventListener("change", () => {
    st.mode = $("mode").value;
    layer = FabricDraw.overlay(viewport, L, st.mode); bind(); loadPorts();
    FabricDraw.legend($("legend"), L, st.mode); redraw();
  });
  $("fabric").addEventListener("change", () => { history.replaceState(null, "", `?fabric=${$("fabric").value}`); drawn = false; loadMap(); });
  // The stage takes what the toolbar leaves, which changes as its text fills in.
  new ResizeObserver(resize).observe(stage);

  resize();
  loadMap().catch((e) => empty(`Could not load the map: ${e.message}`));
  LG.live(["fabric changed", "node changed"], 15000, (ev) => (ev !== "poll" && ev.kind === "node changed" ? loadPorts() : loadMap()));
  // For the benchmark: pan as a dragging hand would, one step per frame.
  const panBy = (dx, dy) => d3.select(overlaySvg).call(zoom.translateBy, dx / st.t.k, dy / st.t.k);
  const zoomTo = (k) => d3.select(overlaySvg).call(zoom.scaleTo, k);
  window.fabricMap = { findNode, fit, tip, panBy, zoomTo, get layout() { return L; }, get transform() { return st.t; } };
})();
