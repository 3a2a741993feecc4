"""Which build in an image index suits a node, pure: the builds' requirements
(requirements), one build checked against a node (nodecheck), AMD and Intel needs
(gpumatch), and the choice (match).
"""
