// What the map found, listed beside the drawing: degraded cables, adapters
// off their rail, ports of ours that are down, cabling problems. Each entry
// knows the things it is about, so a click can zoom to them and light them.
(function () {
  "use strict";
  const { el } = LG;
  const isUp = (p) => String(p.state || "").startsWith("ACTIVE") && p.phys_state === "LinkUp";
  const name = (item) => (item.kind === "adapter" ? `${item.node || item.description} ${item.device || ""}`.trim() : FabricDraw.shortName(item.description));
  // Worded as `llmgw fabric analyze` prints them (llmgw/fabrics/cli.py problem_line).
  const endText = (e) => `${e.description || e.guid} port ${e.port == null ? "?" : e.port}`;

  // The findings of a map (and of the ports heard so far), in the order listed.
  function build(L, map) {
    const thing = (guid) => L.adapterByGuid.get(guid) || L.switches.get(guid);
    const out = { degraded: [], offRail: [], down: [], problems: [] };
    for (const d of L.degraded) {
      out.degraded.push({ kind: "degraded", key: `deg ${d.a.guid} ${d.a.port}`, items: [d.p, d.q],
        text: `${name(d.p)} – ${name(d.q)}: ${d.rate_text || d.rate} where ${d.expected_rate_text || d.expected_rate} is expected`,
        title: `${d.a.description} [${d.a.port}] – ${d.b.description} [${d.b.port}]` });
    }
    for (const m of map.rail_misalignment || []) {
      const ad = L.adapterByGuid.get(m.adapter_guid);
      if (!ad) continue;
      out.offRail.push({ kind: "off-rail", key: `rail ${m.adapter_guid}`, items: [ad],
        text: `${m.host || m.node || ad.node || m.adapter_guid} ${m.device} on ${FabricDraw.shortName(ad.leaf.description)}, a ${m.leaf_carries} leaf`,
        title: m.host_note || m.management || "" });
    }
    for (const ad of L.adapters) {
      if (!ad.live || isUp(ad.live)) continue;
      out.down.push({ kind: "down", key: `down ${ad.guid}`, items: [ad],
        text: `${ad.node} ${ad.device}: ${ad.live.state || "-"} / ${ad.live.phys_state || "-"}`, title: `on ${FabricDraw.shortName(ad.leaf.description)}` });
    }
    for (const p of map.problems || []) {
      out.problems.push({ kind: "problem", key: `problem ${p.code} ${p.a.guid} ${p.a.port}`, items: [thing(p.a.guid), thing(p.b.guid)].filter(Boolean),
        code: p.code, text: `: ${endText(p.a)} - ${endText(p.b)}`, title: p.message });
    }
    return out;
  }

  function items(list) {
    return list.map((f) => el("li", { class: "finding", tabindex: "0", role: "button", "data-kind": f.kind, "data-key": f.key, "data-code": f.code || "", title: f.title || "" },
      f.code ? [el("span", { class: "bad" }, f.code), f.text] : f.text));
  }

  // Fills the side list; `pick(finding)` runs on a click or Enter.
  function render(box, found, pick) {
    const sections = [["degraded", found.degraded], ["off-rail", found.offRail], ["down", found.down]];
    for (const [kind, list] of sections) {
      const s = box.querySelector(`section[data-kind="${kind}"]`);
      s.querySelector("ul").replaceChildren(...items(list));
      s.querySelector(".n").textContent = String(list.length);
      s.hidden = !list.length;
    }
    const problems = box.querySelector("#fabric-problems");
    problems.querySelector("ul").replaceChildren(...items(found.problems));
    problems.hidden = !found.problems.length;
    const all = [...found.degraded, ...found.offRail, ...found.down, ...found.problems];
    box.querySelector(".none").hidden = all.length > 0;
    box.dataset.count = String(all.length);
    const byKey = new Map(all.map((f) => [f.key, f]));
    box.onclick = (ev) => { const li = ev.target.closest("li.finding"); if (li) pick(byKey.get(li.dataset.key), li); };
    box.onkeydown = (ev) => { const li = ev.target.closest("li.finding"); if (li && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); pick(byKey.get(li.dataset.key), li); } };
  }

  // The box to zoom to: the things with room around them to see where they are.
  function box(f) {
    const xs = [], ys = [];
    for (const it of f.items) { xs.push(it.x); ys.push(it.y); if (it.kind === "adapter") { xs.push(it.leaf.x); ys.push(it.leaf.y); } }
    return [[Math.min(...xs) - 130, Math.min(...ys) - 60], [Math.max(...xs) + 130, Math.max(...ys) + 50]];
  }

  // Only the finding lit: its things, the leaves of its adapters, the cables between them.
  function focusOf(L, f) {
    const s = { switches: new Set(), adapters: new Set(), bundles: new Set() };
    for (const it of f.items) {
      if (it.kind === "adapter") { s.adapters.add(it.guid); s.switches.add(it.leaf.guid); } else s.switches.add(it.guid);
    }
    for (const b of L.bundles) if (s.switches.has(b.lo.guid) && s.switches.has(b.hi.guid)) s.bundles.add(b.key);
    return s;
  }

  // Rings around the finding's things, on the overlay's marks layer.
  function mark(layer, f) {
    layer.marks.replaceChildren();
    for (const it of f.items) {
      if (it.kind === "adapter") {
        FabricDraw.svg("circle", { cx: it.x, cy: it.y, r: 10, class: `finding-mark ${f.kind}` }, layer.marks);
        FabricDraw.svg("text", { x: it.x + 13, y: it.y + 3, class: "finding-label" }, layer.marks).textContent = name(it);
      }
      else FabricDraw.svg("rect", { x: it.x - it.w / 2 - 5, y: it.y - it.h / 2 - 5, width: it.w + 10, height: it.h + 10, rx: 6, class: `finding-mark ${f.kind}` }, layer.marks);
    }
  }

  window.FabricFindings = { build, render, box, focusOf, mark };
})();
