"""SocialLLM: the predecessor study's belief/posting/liking simulator on a Barabási–Albert graph."""
