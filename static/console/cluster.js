// The cluster page's filters apply as they change: a choice at once, a
// search once typing pauses. The form still works without this (Apply),
// and the query string stays the page's state, so a view is a link.
(function () {
  const form = document.getElementById("node-filters");
  if (!form) return;
  const submit = () => {
    // Empty controls are left out of the link; a new filter starts at page 1.
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) params.append(k, v);
    const query = params.toString();
    window.location.search = query ? "?" + query : "";
  };
  form.querySelectorAll("select, input[type=checkbox]").forEach((el) =>
    el.addEventListener("change", submit));
  const search = form.querySelector("input[type=search]");
  if (search.value) {
    // Back after a search's reload: keep typing where it was.
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(submit, 400);
  });
  form.addEventListener("submit", (e) => { e.preventDefault(); submit(); });
})();
