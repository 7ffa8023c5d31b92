// The facility page: every site, room, row, rack and PDU as a tree, each
// with its nodes, hold and drain progress, and its draw against its cap
// with where the figure comes from; the fleet-wide what-if sweep; hold and
// release for operators. Reads /api/v1/facility (what `llmgw ctl facility`
// prints) and refreshes when the console hears a hold or a placement.
(function () {
  "use strict";
  const { el, fmt, getJSON, request, DASH } = window.LG;
  const root = document.getElementById("facility-page");
  if (!root) return;
  const tbody = root.querySelector("#tree tbody");
  // The server puts these in the page for operators only.
  const holdControls = document.getElementById("hold-controls");
  const releaseControl = document.getElementById("release-control");
  const mayHold = Boolean(holdControls);
  const COLUMNS = mayHold ? 7 : 6;
  // Opened at the first drawing, then as the operator leaves them.
  const open = new Set();
  const listed = new Set();
  let first = true;
  let sweep = null;
  let lastData = null;

  const kw = (w) => (LG.known(w) ? `${(w / 1000).toFixed(1)} kW` : DASH);
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const SOURCES = [["measured", "measured"], ["derived", "card limits"], ["declared", "profile estimate"]];

  function say(text, bad) {
    const note = document.getElementById("note");
    note.textContent = text;
    note.classList.toggle("bad", Boolean(bad));
  }

  function ago(iso) {
    if (!iso) return "";
    return `${fmt.age((Date.now() - Date.parse(iso)) / 1000)} ago`;
  }

  // Children under their parent as the API says it (the deepest site, room,
  // row or rack holding all their nodes); the API's order, largest first.
  function treeOf(domains) {
    const byKey = new Map(domains.map((d) => [d.domain, d]));
    const kids = new Map();
    const roots = [];
    for (const d of domains) {
      if (d.parent && byKey.has(d.parent)) {
        if (!kids.has(d.parent)) kids.set(d.parent, []);
        kids.get(d.parent).push(d);
      } else roots.push(d);
    }
    return { byKey, kids, roots };
  }

  // Open level by level while the page stays short; then open the way to
  // whatever needs a look (a hold, a domain over its cap).
  function openAtFirst(tree, domains) {
    let frontier = tree.roots;
    let shown = frontier.length;
    while (frontier.length) {
      const next = frontier.flatMap((d) => tree.kids.get(d.domain) || []);
      if (!next.length || shown + next.length > 60) break;
      frontier.forEach((d) => open.add(d.domain));
      shown += next.length;
      frontier = next;
    }
    for (const d of domains) if (d.hold || d.over_cap_w) openTo(tree, d.domain);
  }

  function openTo(tree, key) {
    for (let d = tree.byKey.get(key); d && d.parent; d = tree.byKey.get(d.parent)) open.add(d.parent);
  }

  function nameCell(d, depth, hasKids) {
    const toggle = hasKids
      ? el("button", { type: "button", class: "toggle", "aria-expanded": String(open.has(d.domain)), title: open.has(d.domain) ? "Close" : "Open" }, open.has(d.domain) ? "▾" : "▸")
      : el("span", { class: "toggle-space" });
    const marks = [];
    if (d.hold) marks.push(el("span", { class: "tag warn" }, d.hold.drained ? "held, drained" : d.hold.drain ? "draining" : "held"));
    if (d.over_cap_w) marks.push(el("span", { class: "tag bad over-cap-tag" }, "OVER CAP"));
    return el("td", { class: "name", style: `padding-left:${0.4 + depth * 1.3}rem` }, [
      toggle, el("span", { class: "level" }, d.level), " ", el("b", {}, d.value), " ", ...marks,
    ]);
  }

  function nodesCell(d) {
    if (!d.nodes.length) return el("td", { class: "nodes dim" }, "no node");
    const on = listed.has(d.domain);
    return el("td", { class: "nodes" }, el("button", { type: "button", class: "nodes-toggle link", "aria-expanded": String(on) }, `${plural(d.nodes.length, "node")} ${on ? "▾" : "▸"}`));
  }

  function powerCell(d) {
    const unknown = d.unknown_nodes ? el("span", { class: "dim" }, ` · ${plural(d.unknown_nodes, "node")} unknown`) : null;
    if (!LG.known(d.draw_w)) {
      return el("td", { class: "power" }, [el("span", { class: "dim" }, "unknown"), LG.known(d.cap_w) ? ` of its ${kw(d.cap_w)} cap` : "", unknown]);
    }
    if (!LG.known(d.cap_w)) return el("td", { class: "power" }, [kw(d.draw_w), el("span", { class: "dim" }, " · no cap"), unknown]);
    const share = (100 * d.draw_w) / d.cap_w;
    const over = d.over_cap_w;
    const bar = el("span", { class: `meter power-meter${over ? " over" : share > 90 ? " near" : ""}`, title: `${share.toFixed(0)}% of the cap` },
      el("span", { style: `width:${Math.min(100, share).toFixed(0)}%` }));
    return el("td", { class: over ? "power over-cap" : "power" }, [
      bar, ` ${kw(d.draw_w)} of ${kw(d.cap_w)}`,
      over ? el("b", { class: "bad" }, ` — over by ${kw(over)}`) : null, unknown,
    ]);
  }

  function sourceCell(d) {
    const from = d.draw_from || {};
    const parts = SOURCES.filter(([k]) => from[k]).map(([k, words]) => `${words} on ${from[k]}`);
    const sums = SOURCES.map(([k, words]) => `${words} ${kw(d[`${k}_w`])}`).join(", ");
    return el("td", { class: "source", title: `Summed over the nodes that report each: ${sums}` }, parts.length ? parts.join(" · ") : DASH);
  }

  function holdCell(d) {
    const h = d.hold;
    if (!h) return el("td", { class: "hold dim" }, DASH);
    const state = h.drained ? "held, drained" : h.drain ? "draining" : "held";
    const progress = h.drain && !h.drained
      ? el("div", { class: "progress" }, h.progress ? [h.progress, el("span", { class: "dim" }, ` (${ago(h.progress_at)})`)] : el("span", { class: "dim" }, "waiting for the reconciler's first step"))
      : null;
    return el("td", { class: "hold held", title: `held by ${h.held_by || DASH} at ${new Date(h.held_at).toLocaleString(undefined, { timeZoneName: "short" })}` }, [
      el("b", { class: "warn" }, `${state}: `), h.reason,
      el("span", { class: "dim" }, ` · ${h.held_by || DASH}, ${ago(h.held_at)}`), progress,
    ]);
  }

  function failedCell(d) {
    const hurt = sweep && sweep.byDomain.get(d.domain);
    if (!hurt) return el("td", { class: "if-failed dim" }, sweep && sweep.levels.includes(d.level) ? "no model short" : "");
    return el("td", { class: "if-failed bad" }, hurt.below.map((b) => `${b.model} ${b.replicas}/${b.always_running}`).join(", "));
  }

  // A hold being written survives a redraw (a push may come mid-word).
  const drafts = new Map();

  function actionCell(d) {
    if (!mayHold) return null;
    const td = el("td", { class: "actions" }, (d.hold ? releaseControl : holdControls).content.cloneNode(true));
    const draft = !d.hold && drafts.get(d.domain);
    if (draft) {
      const form = td.querySelector("form.hold-form");
      form.hidden = false;
      td.querySelector("button.hold-open").hidden = true;
      form.elements.reason.value = draft.reason;
      form.elements.drain.checked = draft.drain;
    }
    return td;
  }

  function rows(tree, d, depth, out) {
    const kids = tree.kids.get(d.domain) || [];
    const tr = el("tr", { "data-domain": d.domain, "data-level": d.level, class: d.over_cap_w ? "over-cap" : "" }, [
      nameCell(d, depth, kids.length > 0), nodesCell(d), powerCell(d), sourceCell(d), holdCell(d), failedCell(d), actionCell(d),
    ]);
    out.push(tr);
    if (listed.has(d.domain)) {
      const links = d.nodes.flatMap((n, i) => [i ? ", " : "", el("a", { href: `/nodes/${encodeURIComponent(n)}` }, n)]);
      out.push(el("tr", { class: "node-list", "data-nodes-of": d.domain }, el("td", { colspan: String(COLUMNS), style: `padding-left:${2 + depth * 1.3}rem` }, links)));
    }
    if (open.has(d.domain)) for (const k of kids) rows(tree, k, depth + 1, out);
  }

  function draw(data) {
    lastData = data;
    const tree = treeOf(data.domains);
    if (first && data.domains.length) { openAtFirst(tree, data.domains); first = false; }
    const out = [];
    for (const d of tree.roots) rows(tree, d, 0, out);
    if (!out.length) out.push(el("tr", {}, el("td", { colspan: String(COLUMNS), class: "dim" }, "No node names its place: set llmgw.io/site, room, row, rack and pdu labels (agent.yaml or `llmgw ctl label`).")));
    const focused = document.activeElement && document.activeElement.closest("tr[data-domain] form.hold-form");
    const focusOn = focused && focused.closest("tr").dataset.domain;
    tbody.replaceChildren(...out);
    if (focusOn) {
      const input = tbody.querySelector(`tr[data-domain="${CSS.escape(focusOn)}"] form.hold-form input[name=reason]`);
      if (input) input.focus();
    }
    root.querySelectorAll(".if-failed").forEach((c) => { c.hidden = !sweep; });
    const held = data.domains.filter((d) => d.hold).length;
    const over = data.domains.filter((d) => d.over_cap_w).length;
    const nodes = new Set(data.domains.flatMap((d) => d.nodes)).size;
    document.getElementById("summary").replaceChildren(
      `${plural(nodes, "node")} in ${plural(data.domains.length, "domain")} · ${held} held · `,
      el("span", { class: over ? "bad" : "" }, `${over} over cap`));
  }

  // A push's fetch may answer after a later one (a hold's own): the older
  // answer is dropped, never drawn over the newer.
  let asked = 0;
  let drawn = 0;

  async function refresh() {
    const mine = ++asked;
    const data = await getJSON("/api/v1/facility");
    if (mine < drawn) return;
    drawn = mine;
    draw(data);
    // The frame that shows the first tree (bench/console.py times it).
    if (!performance.getEntriesByName("facility-drawn").length) {
      requestAnimationFrame(() => requestAnimationFrame(() => {
        if (!performance.getEntriesByName("facility-drawn").length) performance.mark("facility-drawn");
      }));
    }
  }

  async function act(method, url, body, done) {
    const r = await request(method, url, body);
    if (!r.ok) {
      const d = r.data || {};
      const why = d.detail || Object.entries(d).map(([k, v]) => `${k}: ${[].concat(v).join("; ")}`).join("; ") || `HTTP ${r.status}`;
      say(why, true);
      return false;
    }
    // Said once the tree shows it.
    await refresh();
    say(done, false);
    return true;
  }

  tbody.addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-domain]");
    if (!tr) return;
    const key = tr.dataset.domain;
    if (e.target.closest("button.toggle")) {
      if (open.has(key)) open.delete(key); else open.add(key);
      draw(lastData);
    } else if (e.target.closest("button.nodes-toggle")) {
      if (listed.has(key)) listed.delete(key); else listed.add(key);
      draw(lastData);
    } else if (e.target.closest("button.hold-open")) {
      const form = tr.querySelector("form.hold-form");
      form.hidden = false;
      e.target.closest("button").hidden = true;
      drafts.set(key, { reason: "", drain: false });
      form.elements.reason.focus();
    } else if (e.target.closest("button.release")) {
      // A body, so the request carries the CSRF token.
      act("DELETE", `/api/v1/facility/holds/${encodeURIComponent(key)}`, {}, `${key} released`);
    }
  });
  tbody.addEventListener("input", (e) => {
    const form = e.target.closest("form.hold-form");
    if (form) drafts.set(form.closest("tr").dataset.domain, { reason: form.elements.reason.value, drain: form.elements.drain.checked });
  });
  tbody.addEventListener("submit", (e) => {
    const tr = e.target.closest("tr[data-domain]");
    if (!tr) return;
    e.preventDefault();
    const form = e.target;
    const key = tr.dataset.domain;
    const drain = form.elements.drain.checked;
    // Gone from the drafts first: the hold's own push may redraw the row.
    const draft = drafts.get(key);
    drafts.delete(key);
    act("POST", "/api/v1/facility/holds", { domain: key, reason: form.elements.reason.value, drain }, `${key} held${drain ? ", draining" : ""}`)
      .then((ok) => { if (!ok && draft) drafts.set(key, draft); });
  });

  // The fleet-wide sweep: each domain of the chosen levels failed alone, on
  // a copy of the fleet. The answer stays beside the tree until run again.
  const sweepForm = document.getElementById("sweep-form");
  const sweepOut = document.getElementById("sweep");

  function sweepTable(data) {
    const rowsOut = data.hurt.map((h) => el("tr", { "data-domain": h.domain }, [
      el("td", {}, el("a", { href: "#", class: "show-domain" }, h.domain)),
      el("td", {}, String(h.nodes)),
      el("td", {}, String(h.lost)),
      el("td", {}, String(h.not_replaced)),
      el("td", { class: "bad" }, h.below.map((b) => `${b.model}: ${b.replicas} of ${b.always_running} always running`).join("; ")),
    ]));
    return el("table", { class: "grid sweep-hurt" }, [
      el("thead", {}, el("tr", {}, ["Domain", "Nodes", "Replicas lost", "Cannot be placed again", "Held models left short"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rowsOut),
    ]);
  }

  function showSweep(data, at) {
    sweep = { ...data, byDomain: new Map(data.hurt.map((h) => [h.domain, h])), at };
    const short = (data.already_short || []).map((s) => el("p", { class: "already-short warn" }, `${s.model} is already at ${s.replicas} of ${s.always_running} always-running replicas, before any failure.`));
    const head = el("p", { class: "sweep-summary" }, [
      el("b", { class: data.hurt.length ? "bad" : "ok" }, data.hurt.length ? `${data.hurt.length} of ${data.tried}` : `None of ${data.tried}`),
      ` domains (${data.levels.join(", ")}) would, failing alone, leave a held model below its always-running replicas`,
      el("span", { class: "dim sweep-at" }, ` · swept at ${at.toLocaleTimeString(undefined, { timeZoneName: "short" })}`),
    ]);
    sweepOut.replaceChildren(head, ...short, ...(data.hurt.length ? [sweepTable(data)] : []));
    if (lastData) draw(lastData);
  }

  sweepForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const levels = [...sweepForm.querySelectorAll("input[name=levels]:checked")].map((i) => i.value);
    if (!levels.length) { sweepOut.replaceChildren(el("p", { class: "bad" }, "Choose at least one level to fail.")); return; }
    const button = document.getElementById("sweep-run");
    button.disabled = true;
    sweepOut.replaceChildren(el("p", { class: "dim" }, `Failing each ${levels.join(" and ")} in turn…`));
    try {
      const r = await request("GET", `/api/v1/whatif/sweep?levels=${encodeURIComponent(levels.join(","))}`);
      if (!r.ok) {
        const d = r.data || {};
        sweepOut.replaceChildren(el("p", { class: "bad" }, (d.levels || [d.detail || `HTTP ${r.status}`]).join("; ")));
        return;
      }
      showSweep(r.data, new Date());
    } finally {
      button.disabled = false;
    }
  });
  sweepOut.addEventListener("click", (e) => {
    const a = e.target.closest("a.show-domain");
    if (!a || !lastData) return;
    e.preventDefault();
    const key = a.closest("tr").dataset.domain;
    openTo(treeOf(lastData.domains), key);
    draw(lastData);
    const row = tbody.querySelector(`tr[data-domain="${CSS.escape(key)}"]`);
    if (row) { row.scrollIntoView({ block: "center" }); row.classList.add("flash"); }
  });

  LG.live(["facility changed", "models changed"], 15000, async (why) => {
    await refresh();
    // What ran where has changed since the sweep: say so, keep the answer.
    if (why !== "poll" && sweep && !sweepOut.querySelector(".sweep-stale")) {
      sweepOut.querySelector(".sweep-summary").append(el("span", { class: "warn sweep-stale" }, " · the fleet has changed since: run it again"));
    }
  });
  refresh().catch((e) => say(`facility: ${e.message}`, true));
})();
