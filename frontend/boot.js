// Loads the WebAssembly app. A file of its own, so the page's CSP needs no inline script.
import init from './frontend.js';
init({ module_or_path: new URL('./frontend_bg.wasm', import.meta.url) });
