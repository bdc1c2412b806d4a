// Runs between require.js and the widget manager on pages with stored widgets (nb_ipywidgets_js
// in _config.yml). Each module of the manager (embed-amd.js defines them all by name) loads its
// icon fonts from the folder require.js maps its name to, by default <page folder>/@jupyter-widgets/.
// Which module's @font-face the browser uses first is a race, so every one of them must point at
// the local copy in vendor/ (with only dist/ mapped, chapter 1 once fetched its fonts from
// notebooks/@jupyter-widgets/ and got 404s).
const vendor = document.documentElement.dataset.content_root + "vendor/html-manager";
requirejs.config({
  paths: Object.fromEntries(
    ["html-manager/dist", "html-manager", "base", "base7", "controls", "controls7"].map((name) => [
      `@jupyter-widgets/${name}`,
      name === "html-manager/dist" ? vendor : `${vendor}/${name}`,
    ]),
  ),
});
