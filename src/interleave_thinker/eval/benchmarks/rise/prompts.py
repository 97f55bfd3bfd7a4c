"""RISEBench's judge prompts: module-level strings of its ``utils.py`` at the pinned commit."""

from __future__ import annotations

from interleave_thinker.eval.prompts import EvalPrompt, Repo

REPO = Repo("PhoenixZ810/RISEBench", "5f226519b25c005bb32fb83864bbd1845ab85c23")
_DIGESTS = {
    "consist": "84b272d821670cd2466866e27d80bed659dc677964a62a2c1459ad673c4eaf70",
    "reasoning": "2a1a3394442065a25958b03047158bf670dbb0c771c5d9a7d299cdc02eb0c25b",
    "reasoning_w_input": "b781425c015b41a646eae87dea188b871f89a4749a8911281e1e3ac52f050cd0",
    "generation": "2d607960deffa2e1b5178bfbf9f06c865654ddbe35b249caa9e59c616ff6c916",
    "spatial_ref": "df84b77e28183eddb0e822170970bec0a85302844ffae3c4a0effde7ada5279b",
    "spatial_ref_img": "4e043b8e696d40a4be73538134b4182dc5a87a354e5878983c943a536e22e25d",
    "spatial_ref_w_input": "444d3a201c30fb2fe2a88e48aca355c4f075f655c2edc4ae50a6e1fb263c668d",
    "spatial_qual": "3bead46a4b0bcf295700caec5c116809dd72d4a03a750f7bb9da3e2563123c80",
    "spatial_cons": "b20ca629d36da9cf2fa591ef3c1dd5909177b4d245172479345d6fa137c4c55e",
    "logical_cons_ans": "28a6dd5a2e714acf681455acbf8dc01491559ecdcc54523e50a382d1c4689aaf",
    "logical_cons": "49b6870dfb1b4cb64e303d27845794e403d48ef877b85178fea9c48a425475c1",
    "logical_txt": "6719763c72ab8ef9e015ed4efe3ef96c4cd01c0c2cda8457cad1a91ac69eb956",
    "logical_img": "ce89313d6047592decded49f4324000ced3c91f87153ca458dc1f55634e08cd6",
    "logical_img_wo_q": "8cd49d5335cd303c810affa011b21dcd1416fcbb76df00f175ee3af949dcaa8d",
}
PROMPTS = {
    f"rise_prompt_{short}": EvalPrompt(REPO, "utils.py", "literal", f"prompt_{short}", sha)
    for short, sha in _DIGESTS.items()
}
