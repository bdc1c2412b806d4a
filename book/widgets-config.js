// Runs between require.js and the widget manager on pages with stored widgets (nb_ipywidgets_js
// in _config.yml). Each module of the manager (embed-amd.js defines @jupyter-widgets/base,
// controls, html-manager, ... by name) loads its icon fonts from the folder require.js maps its name
// to, by default <page folder>/@jupyter-widgets/. Which module's @font-face the browser uses first
// is a race, so every one must map into the local copy in vendor/ (with only dist/ mapped, chapter 1
// once fetched its fonts from notebooks/@jupyter-widgets/ and got 404s). require.js takes the
// longest matching prefix: dist/libembed-amd -> vendor/html-manager/libembed-amd, and every other
// @jupyter-widgets/<name> -> vendor/html-manager/<name>.
const vendor = document.documentElement.dataset.content_root + "vendor/html-manager";
requirejs.config({
  paths: {
    "@jupyter-widgets": vendor,
    "@jupyter-widgets/html-manager/dist": vendor,
  },
});
