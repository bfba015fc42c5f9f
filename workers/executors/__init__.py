"""One Builder and one Runner per executor family, chosen by executor name in ``registry``."""
